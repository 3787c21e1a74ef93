# The compiled twin of _memory_hot (_memory_hot_c.pyx): its builders have the same shape.
from ._memory_hot import AtBuilder, Builder

SOURCE_SHA256: str
HOT: dict[str, Builder]
AT: dict[str, AtBuilder]
