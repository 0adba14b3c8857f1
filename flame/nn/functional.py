"""flame.nn.functional: the composite functions (PyTorch names), defined in flame.frontend.functional,
flame.frontend.losses, flame.frontend.margin_losses (margin, embedding and likelihood losses,
gumbel_softmax), flame.frontend.activations (the other activations, normalize, similarities,
huber and KL losses), flame.frontend.vision (convolutions, pooling, interpolation, batch/group norm)
and flame.frontend.sampling (grid_sample, affine_grid)."""

from flame.frontend.activations import *  # noqa: F401,F403
from flame.frontend.activations import __all__ as _activations
from flame.frontend.functional import *  # noqa: F401,F403
from flame.frontend.functional import __all__ as _core
from flame.frontend.losses import *  # noqa: F401,F403
from flame.frontend.losses import __all__ as _more
from flame.frontend.margin_losses import *  # noqa: F401,F403
from flame.frontend.margin_losses import __all__ as _margin
from flame.frontend.sampling import *  # noqa: F401,F403
from flame.frontend.sampling import __all__ as _sampling
from flame.frontend.vision import *  # noqa: F401,F403
from flame.frontend.vision import __all__ as _vision

__all__ = [*_core, *_more, *_margin, *_activations, *_vision, *_sampling]
