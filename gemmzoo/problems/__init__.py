"""What a problem is: problem classes, shape grids (named and model grids) and their arithmetic on the
host.
"""
