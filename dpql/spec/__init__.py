"""dpql.spec"""
