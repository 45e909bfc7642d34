"""dpql.synth"""
