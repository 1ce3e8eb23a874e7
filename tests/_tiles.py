"""Shapes that chapter 13's and chapter 14's tests share (tests/test_tiled.py, tests/test_backward.py)."""

# (batch, T_q, T_k, block_size): T a multiple of the block and not, T_q != T_k both ways,
# block 1 (the online softmax one key at a time), a block larger than T (one tile), T = 1
SHAPES = [
    ((), 8, 8, 4),
    ((), 8, 8, 3),
    ((2,), 10, 10, 4),
    ((2, 3), 7, 7, 2),
    ((2,), 5, 9, 2),
    ((2,), 9, 5, 2),
    ((1, 2), 3, 11, 4),
    ((2,), 11, 3, 4),
    ((2,), 6, 6, 1),
    ((2,), 5, 7, 1),
    ((2,), 6, 6, 100),
    ((2,), 4, 9, 100),
    ((3,), 1, 1, 2),
    ((3,), 1, 6, 2),
    ((3,), 6, 1, 2),
    ((2, 2), 33, 17, 8),
]
