"""torch's distributions validate their arguments by default, but torch._dynamo turns that off for the whole
process the first time anything runs torch.compile (another test's peer, in the same worker): each test here
sees torch's default, on, and leaves the setting as it found it."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _torch_validates_as_by_default():
    before = torch.distributions.Distribution._validate_args
    torch.distributions.Distribution.set_default_validate_args(True)
    yield
    torch.distributions.Distribution.set_default_validate_args(before)
