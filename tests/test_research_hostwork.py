"""The allocator experiment (``specdec_lib.research.hostwork``): it says what it set, or why not."""

from specdec_lib.research.hostwork import reuse_freed_memory


def test_reuse_freed_memory_says_what_it_set():
    got = reuse_freed_memory()
    assert got.startswith(("glibc mallopt", "unchanged"))  # glibc here; elsewhere, why not
    assert reuse_freed_memory() == got  # setting it again changes nothing
