"""The user-facing side: Tensor, tracing, @compile, eager dispatch, gradients, composites."""

from flame.frontend import methods  # noqa: F401  (binds Tensor's methods: a Tensor is whole once flame.frontend is)
