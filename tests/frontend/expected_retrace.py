"""A re-trace that ordinary training code makes on purpose (gradient accumulation's .grad None -> set,
a model switched to eval(), a dim made dynamic) is said in flame's log at info level, not warned."""

import contextlib
import logging
import re
import warnings

import flame


@contextlib.contextmanager
def said_at_info(caplog, match: str):
    """Assert the block re-traces for a reason matching `match`, said at info level, with no warning."""
    start = len(caplog.records)
    with warnings.catch_warnings(), caplog.at_level(logging.INFO, logger="flame"):
        warnings.simplefilter("error", flame.RecompileWarning)
        yield
    said = [r.getMessage() for r in caplog.records[start:] if "re-tracing" in r.getMessage()]
    assert any(re.search(match, m) for m in said), said
