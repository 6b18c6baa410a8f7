"""The contract every backend meets: the Backend base class, dtypes, accuracy classes and the checks a
registered backend passes.
"""
