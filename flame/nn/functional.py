"""flame.nn.functional: the composite functions (PyTorch names), defined in flame.frontend.functional,
flame.frontend.losses, flame.frontend.margin_losses (margin, embedding and likelihood losses,
gumbel_softmax), flame.frontend.ctc (ctc_loss), flame.frontend.activations (the other activations,
normalize, similarities, huber and KL losses), flame.frontend.conv (convolutions), flame.frontend.pooling,
flame.frontend.fractional_pool, flame.frontend.resample (interpolate, pixel (un)shuffle, fold and unfold),
flame.frontend.norms (batch, group and instance norm), flame.frontend.sampling (grid_sample, affine_grid) and
flame.frontend.mha (multi_head_attention_forward);
the activations and dropouts that take torch's `inplace` argument, and their in-place spellings, from
flame.frontend.activations_inplace."""

from flame.frontend import activations_inplace as _inplace
from flame.frontend.activations import *  # noqa: F401,F403
from flame.frontend.activations import __all__ as _activations
from flame.frontend.conv import *  # noqa: F401,F403
from flame.frontend.conv import __all__ as _conv
from flame.frontend.ctc import *  # noqa: F401,F403
from flame.frontend.ctc import __all__ as _ctc
from flame.frontend.fractional_pool import *  # noqa: F401,F403
from flame.frontend.fractional_pool import __all__ as _fractional
from flame.frontend.functional import *  # noqa: F401,F403
from flame.frontend.functional import __all__ as _core
from flame.frontend.linear_cross_entropy import linear_cross_entropy
from flame.frontend.losses import *  # noqa: F401,F403
from flame.frontend.losses import __all__ as _more
from flame.frontend.margin_losses import *  # noqa: F401,F403
from flame.frontend.margin_losses import __all__ as _margin
from flame.frontend.mha import multi_head_attention_forward
from flame.frontend.more_math import pdist
from flame.frontend.norms import *  # noqa: F401,F403
from flame.frontend.norms import __all__ as _norms
from flame.frontend.pooling import *  # noqa: F401,F403
from flame.frontend.pooling import __all__ as _pooling
from flame.frontend.resample import *  # noqa: F401,F403
from flame.frontend.resample import __all__ as _resample
from flame.frontend.sampling import *  # noqa: F401,F403
from flame.frontend.sampling import __all__ as _sampling

__all__ = [*_core, *_more, *_margin, *_activations, *_conv, *_pooling, *_resample, *_norms, *_sampling, *_ctc,
           *_fractional, "linear_cross_entropy", "multi_head_attention_forward", "pdist"]
__all__ = sorted(set(__all__) | set(_inplace.__all__))
for _name in _inplace.__all__:  # over the star imports' names: these take torch's `inplace` argument
    globals()[_name] = getattr(_inplace, _name)
del _name
