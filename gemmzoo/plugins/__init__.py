"""The plugin host: loading backends from the ``gemmzoo`` entry-point group, the digest of their code,
time limits on their calls, and messages that point at them.
"""
