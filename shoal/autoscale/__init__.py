"""shoal.autoscale"""
