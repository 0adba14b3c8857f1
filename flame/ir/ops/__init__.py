"""Op declarations, one module per family. Importing this package fills flame.ir.registry."""

from flame.ir.ops import attention, conv, creation, elementwise, indexing, linalg, movement, random, reduce  # noqa: F401
