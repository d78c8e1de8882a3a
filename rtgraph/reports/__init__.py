"""Reports: what a compiled program and its run look like, as text, traces and pictures.

The picture modules (``timeline``, ``dagviz``, ``memoryviz``, with their shared ``style``) are
the only code in rtgraph that imports matplotlib; import them directly when a picture is wanted,
so the rest of the package never pays for it.
"""
