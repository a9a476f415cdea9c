"""course_pkg: the code behind "Attention, tested".

One module per concept, in the order the book introduces them:

- :mod:`course_pkg.device` — choosing the device, seeding.
- :mod:`course_pkg.kernel_regression` — Nadaraya–Watson attention pooling.
- :mod:`course_pkg.attention` — masked softmax, scoring functions, multi-head attention.
- :mod:`course_pkg.positional` — sinusoidal and learned positional encodings.
- :mod:`course_pkg.plotting` — heatmaps and line plots used by every chapter.
"""

from course_pkg.device import get_device, seed_everything

__all__ = ["get_device", "seed_everything"]
