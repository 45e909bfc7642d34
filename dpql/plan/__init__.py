"""dpql.plan"""
