"""The user-facing side: Tensor, tracing, @compile, eager dispatch, gradients, composites."""
