"""The generated tables of docs/benchmarks.md, rebuilt from the result files the page cites.

Each generated table sits between two comments in the page, the first naming the table and its
result files (paths from the repository's root):

    <!-- table embedded-throughput: benchmarks/results/peers-20261128T045306Z.json -->
    | ... the generated Markdown ... |
    <!-- /table -->

``python -m benchmarks.report --check`` fails when a table differs from what its files give (a unit
test runs the same check, so the page cannot drift from its results); ``--write`` rewrites them;
``--from RESULT`` first points every table that cites a result of RESULT's kind (the file name before
its UTC stamp: ``peers``, ``quick``, ``bench_recovery``, ...) at RESULT, which is how a new run
enters the page. Result files no page cites any more are listed, to be removed with ``git rm``: git
keeps old runs, the tree keeps what the docs cite.

Modules: ``page`` (the markers, citations, the command line's work), ``peers`` (tables from a peer
suite result, ``benchmarks.suite``), ``runs`` (tables from the single-system scripts' results),
``fmt`` (cells, captions), ``tables`` (every table name and its renderer).
"""
