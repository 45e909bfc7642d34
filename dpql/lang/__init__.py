"""dpql.lang"""
