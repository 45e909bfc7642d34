"""dpql.privacy"""
