"""The demo's latency histogram (robot_dynamics/demo.py, latency_histogram), drawn on an Agg figure
without running the demo.  Oracle: the samples the test makes and numpy's percentiles of them."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from robot_dynamics.demo import latency_histogram  # noqa: E402


@pytest.fixture
def ax():
    fig, a = plt.subplots()
    yield a
    plt.close(fig)


def test_a_loaded_runs_tail_stays_off_the_axis(ax):
    """A loaded run: most commands within 2 ms, 3 % at 50-150 ms (p99 far beyond 10 ms).  The axis
    still runs 0..10 ms, every sample is in a bar (the slow ones in the last), the p99 is in the
    legend with its value and marked off the axis, the p50 line where it falls."""
    rng = np.random.default_rng(0)
    lat = np.concatenate([rng.uniform(0.2, 2.0, 970), rng.uniform(50.0, 150.0, 30), [np.nan] * 5])
    latency_histogram(ax, lat)
    assert ax.get_xlim() == (0.0, 10.0)
    bars = ax.patches
    assert sum(b.get_height() for b in bars) == 1000                  # NaNs left out, none lost
    last = max(bars, key=lambda b: b.get_x())
    assert last.get_x() + last.get_width() == pytest.approx(10.0)
    assert last.get_height() == 30                                   # the 30 slow ones
    assert all(b.get_x() >= -1e-12 and b.get_x() + b.get_width() <= 10.0 + 1e-12 for b in bars)
    p50, p99 = np.percentile(lat[np.isfinite(lat)], [50, 99])
    assert p99 > 10.0
    labels = ax.get_legend_handles_labels()[1]
    assert f"p99 {p99:.2f} ms (off the axis)" in labels and f"p50 {p50:.2f} ms" in labels
    xs = sorted(line.get_xdata()[0] for line in ax.get_lines())
    assert xs == pytest.approx([p50, 10.0])
    assert "clipped at 10" in ax.get_xlabel()


def test_a_quiet_run_draws_both_percentiles_on_the_axis(ax):
    lat = np.linspace(0.1, 1.0, 200)
    latency_histogram(ax, lat, clip_ms=5.0)
    assert ax.get_xlim() == (0.0, 5.0)
    p50, p99 = np.percentile(lat, [50, 99])
    assert ax.get_legend_handles_labels()[1] == [f"p50 {p50:.2f} ms", f"p99 {p99:.2f} ms"]
    assert sorted(line.get_xdata()[0] for line in ax.get_lines()) == pytest.approx([p50, p99])


def test_no_sample_is_an_empty_axis_not_an_error(ax):
    latency_histogram(ax, np.array([np.nan, np.nan]))
    assert ax.get_xlim() == (0.0, 10.0) and not ax.patches
