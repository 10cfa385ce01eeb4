"""shoal.operator"""
