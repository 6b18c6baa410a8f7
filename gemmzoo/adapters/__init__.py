"""Every use of another library's internals, one small module per library.

A module here is the only place gemmzoo touches a name the library does not document. Each
checks the library's version against the range it was written for, offers a public-API fallback
where one exists, and is covered by a test that fails loudly when the library changes
(``tests/test_adapters.py``).
"""
