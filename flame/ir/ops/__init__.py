"""Op declarations, one module per family. Importing this package fills flame.ir.registry."""

from flame.ir.ops import (  # noqa: F401
    attention,
    collective,
    conv,
    creation,
    elementwise,
    fp8,
    host,
    indexing,
    linalg,
    movement,
    random,
    reduce,
    scan,
    special,
)
