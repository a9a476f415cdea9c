"""course_pkg: the code behind "Attention, tested".

One module per concept, in the order the book introduces them. A new piece
of code goes into the module of its concept; a new concept gets a module.

=========================  =========================================="""

from course_pkg.device import get_device, seed_everything

__all__ = ["get_device", "seed_everything"]
