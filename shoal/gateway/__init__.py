"""shoal.gateway"""
