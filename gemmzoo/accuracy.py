"""Accuracy classes: how close to the exact product a backend promises its result is.

- ``"componentwise"`` (the default, what every classical GEMM gives): each element's error is
  bounded by the magnitudes of the very terms summed for it, ``(|A|·|B|)ij``. Rows or columns of
  tiny values get errors as tiny as themselves.
- ``"normwise"`` (weaker): each element's error is bounded by the largest row of A and the
  largest column of B, ``max_i ‖A(i,:)‖₂ · max_j ‖B(:,j)‖₂``. Fast algorithms that mix rows or
  columns (Strassen, Winograd) give this and no more: a tiny row of C inherits errors of the size
  of the large rows.

The conformance suite checks the bound of the class a backend declares (``Backend.accuracy``);
``best_backend`` and ``gemmzoo.matmul`` pick a normwise backend only when the caller passes
``accuracy="normwise"``.
"""

from __future__ import annotations

from typing import Any

COMPONENTWISE = "componentwise"
NORMWISE = "normwise"

#: Every accuracy class, strongest first.
ACCURACY_CLASSES: tuple[str, ...] = (COMPONENTWISE, NORMWISE)


def accuracy_of(backend: Any) -> Any:
    """The accuracy class ``backend`` declares; componentwise for one that declares none."""
    from gemmzoo.contract.backend import declared

    return declared(backend, "accuracy")


def check_accuracy(accuracy: str) -> str:
    """``accuracy`` if it names a class; a ``ValueError`` listing the classes otherwise."""
    if accuracy not in ACCURACY_CLASSES:
        raise ValueError(f"unknown accuracy class {accuracy!r}; known: {', '.join(ACCURACY_CLASSES)}")
    return accuracy


def accepts(accepted: str, declared: Any) -> bool:
    """Whether a caller who accepts class ``accepted`` accepts a backend that declares ``declared``
    (a class accepts itself and every stronger one)."""
    order = ACCURACY_CLASSES.index
    return declared in ACCURACY_CLASSES and order(declared) <= order(check_accuracy(accepted))
