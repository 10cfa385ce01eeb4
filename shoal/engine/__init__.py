"""shoal.engine"""
