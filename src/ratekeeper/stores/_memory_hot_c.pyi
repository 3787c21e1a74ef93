# The compiled twin of _memory_hot (_memory_hot_c.pyx): its builders have the same shape.
from ._memory_hot import Builder

SOURCE_SHA256: str
HOT: dict[str, Builder]
