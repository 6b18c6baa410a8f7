"""The call path: ``gemmzoo.matmul`` and the class entry points, plans per problem, autograd."""
