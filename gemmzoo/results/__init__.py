"""Result files and what reads them: the one record format and its validator, compare, text and HTML
reports, atomic output.
"""
