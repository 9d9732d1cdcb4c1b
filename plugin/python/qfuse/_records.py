"""Records: the list of dicts qfuse returns as tables (layers, refusals, the
per-layer profile, comparisons), convertible to a pandas DataFrame."""

from . import _qfuse


class Records(list):
    """A list of flat dicts, one per row.

    to_dataframe() needs pandas (imported on first use). Comparison records
    also print as `qfuse compare`'s table and write its HTML report; they
    carry the fused graph's layers for that report (`layers`)."""

    def __init__(self, rows=(), layers=None):
        super().__init__(rows)
        self.layers = layers

    def to_dataframe(self):
        try:
            import pandas
        except ImportError as e:
            raise ImportError("Records.to_dataframe needs pandas (Debian: python3-pandas)") from e
        rows = [{k: v for k, v in r.items() if k not in ("sums", "post_op_list")} for r in self]
        return pandas.DataFrame(rows)

    def _is_comparison(self):
        return bool(self) and "isolated_max_lsb" in self[0]

    def table(self):
        """The text table `qfuse compare` prints (comparison records)."""
        if not self._is_comparison():
            raise TypeError("table() prints comparison records")
        return _qfuse.report_table(list(self))

    def html(self, title="model", inputs="inputs given in Python"):
        """`qfuse compare`'s self-contained HTML report, as a string."""
        if not self._is_comparison() and self:
            raise TypeError("html() reports comparison records")
        return _qfuse.report_html(list(self), list(self.layers or []), title, inputs)

    def write_html(self, path, title="model", inputs="inputs given in Python"):
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.html(title, inputs))
        return path

    def __str__(self):
        if self._is_comparison():
            return self.table()
        return "\n".join(str(r) for r in self)
