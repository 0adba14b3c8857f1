"""flame's IR: dtypes, TensorType, Value/Op/Graph, the op registry, printer, parser and verifier.

A Graph prints as its text (str(g) is print_graph(g)); the printer reads graph.py, so the method is
bound here, where both are whole. Importing any flame.ir module imports this package first."""

from flame.ir import ops as _ops  # noqa: F401  (fills the registry)
from flame.ir.builder import Builder
from flame.ir.dtypes import (
           ALL_DTYPES,
           FLOAT_DTYPES,
           DType,
           bf16,
           boolean,
           dtype_of,
           f16,
           f32,
           f64,
           i8,
           i16,
           i32,
           i64,
           u8,
)
from flame.ir.graph import ROLES, Graph, Op, Value
from flame.ir.parser import parse
from flame.ir.printer import print_graph
from flame.ir.registry import REGISTRY, OpDef, get
from flame.ir.types import TensorType
from flame.ir.verify import verify

__all__ = ["ALL_DTYPES", "FLOAT_DTYPES", "REGISTRY", "ROLES", "Builder", "DType", "Graph", "Op", "OpDef",
           "TensorType", "Value", "bf16", "boolean", "dtype_of", "f16", "f32", "f64", "get", "i8", "i16", "i32", "i64",
           "u8", "parse", "print_graph", "verify"]

Graph.__str__ = print_graph
