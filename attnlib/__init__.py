"""attnlib: the small library the attention course builds, chapter by chapter.

Read each module next to its chapter. Shapes: ``B`` batch, ``T`` tokens
(``T_q``, ``T_k``), ``V`` vocabulary, ``d_model``, ``n_heads``,
``d_head = d_model // n_heads``. Row vectors: ``Q = X @ W_q``. Boolean masks
use True = "may attend" (as ``F.scaled_dot_product_attention``; note that
``nn.MultiheadAttention`` uses the opposite, True = blocked).

===========================  ====================  ==========================================
Chapter                      Module                Functions
===========================  ====================  ==========================================
1 From tokens to vectors     ``embedding``         ``one_hot``, ``embed``
all chapters (figures)       ``plot``              ``show_matrix``, ``show_matrices``
all chapters (exercises)     ``check``             one checker per coding exercise
===========================  ====================  ==========================================
"""
from ._validate import AttnlibError
from .embedding import embed, one_hot
from . import check, plot

__all__ = ["AttnlibError", "one_hot", "embed", "check", "plot"]
