"""dpql.data"""
