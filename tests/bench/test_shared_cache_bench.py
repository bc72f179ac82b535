"""bench/shared_cache.py's request lists: the stated share repeats a hot text, the rest are never repeated, and
the same list is used with the cache off and on."""

from bench.shared_cache import HOT_TEXTS, request_texts, table


def test_repeat_shares_are_what_they_say():
    for repeat in (0.0, 0.5, 0.9):
        texts = request_texts(repeat, 4000)
        hot = [t for t in texts if t.startswith("hot ")]
        assert abs(len(hot) / len(texts) - repeat) < 0.03
        assert len({t for t in hot}) <= HOT_TEXTS
        once = [t for t in texts if not t.startswith("hot ")]
        assert len(set(once)) == len(once)
    assert request_texts(0.5, 100) == request_texts(0.5, 100)


def test_the_table_flags_missed_targets():
    def level(r, off, on):
        return {
            "repeat": r,
            "ratio": on / off,
            "off": {"throughput_rps": off, "p95_ms": 10},
            "on": {"throughput_rps": on, "p95_ms": 10},
        }

    results = {
        "levels": [level(0.0, 100, 90), level(0.5, 100, 200), level(0.9, 100, 500)],
        "outage": {
            "down": {"statuses": {"200": 10, "500": 1}, "p95_ms": 30, "errors": 1},
            "down_p95_vs_off": 3.0,
            "back_within_s": None,
        },
    }
    text = table(results)
    assert "MISSED on/off >= 0.95" in text and "met  on/off >= 1.8" in text
    assert "MISSED cache down: only 200/503" in text and "MISSED cache down: p95" in text
    assert "MISSED back within 30 s" in text
