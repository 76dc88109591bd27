"""Properties of topic config parsing (issue 24): every input is a TopicConfig or an InvalidConfigError.

For any names and string values, :meth:`TopicConfig.parse` returns overrides or raises
InvalidConfigError (UnsupportedConfigError is one), never another exception; what it
accepts survives ``to_json``/``from_json`` unchanged, describes to the same strings, and
keeps each value inside its Kafka range. Derandomized: a failure replays as is.
"""

from __future__ import annotations

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lkstream.config import BrokerConfig
from lkstream.errors import InvalidConfigError
from lkstream.storage.topic_config import KEYS, TopicConfig
from lkstream.storage.topic_config_keys import INT_MAX, INT_MIN, LONG_MAX, LONG_MIN, ConfigType

SETTINGS = settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
BROKER = BrokerConfig.build({})

names = st.sampled_from(sorted(KEYS)) | st.text(max_size=30)
numbers = st.integers(min_value=-(2**70), max_value=2**70).map(str)
decimals = st.floats(allow_nan=True, allow_infinity=True).map(repr)
WORDS = ("delete", "compact", "compact,delete", "", " ", "producer", "zstd", "LogAppendTime", "CreateTime", "true")
ODD = ("false", "TRUE", "*", "0:1,2:3", "3.0-IV1", "nan", "inf", "-0", "+5", "1e3", "0x10", "١٢")
words = st.sampled_from(WORDS + ODD)
values = numbers | decimals | words | st.text(max_size=20)


@SETTINGS
@given(st.dictionaries(names, values, max_size=6))
@example({"retention.ms": str(10**30)})  # issue 28, finding 11
@example({"min.cleanable.dirty.ratio": "NaN"})
@example({"segment.bytes": "١٢٣٤٥٦٧٨"})  # non-ASCII digits: Python's int() takes them, Kafka's parser does not
def test_parse_accepts_or_refuses_with_invalid_config_only(raw: dict[str, str]) -> None:
    try:
        configs = TopicConfig.parse(raw)
    except InvalidConfigError as exc:
        assert exc.name in raw or exc.name == "configs"
        return
    assert set(configs.overrides) == set(raw)
    for name, value in configs.overrides.items():
        kind = KEYS[name].type
        if kind is ConfigType.LONG:
            assert isinstance(value, int) and LONG_MIN <= value <= LONG_MAX
        elif kind is ConfigType.INT:
            assert isinstance(value, int) and INT_MIN <= value <= INT_MAX
        elif kind is ConfigType.DOUBLE:
            assert 0.0 <= value <= 1.0  # the only DOUBLE config is min.cleanable.dirty.ratio
    assert TopicConfig.from_json(configs.to_json()) == configs
    rendered = {e.name: e.value for e in configs.describe(BROKER)}
    assert {name: rendered[name] for name in raw} == configs.to_json()
    configs.effective(BROKER)  # never raises


@SETTINGS
@given(
    st.dictionaries(st.sampled_from(sorted(KEYS)), values, max_size=4),
    st.dictionaries(st.sampled_from(sorted(KEYS)), values, max_size=4),
    st.sets(st.sampled_from(sorted(KEYS)), max_size=3),
)
def test_with_changes_equals_parsing_the_merged_mapping(
    base_raw: dict[str, str], changes: dict[str, str], deleted: set[str]
) -> None:
    try:
        base = TopicConfig.parse(base_raw)
        changed = base.with_changes(set=changes, delete=deleted)
    except InvalidConfigError:
        return
    merged = {k: v for k, v in base.to_json().items() if k not in deleted}
    merged.update(TopicConfig.parse(changes).to_json())
    assert changed == TopicConfig.parse(merged)
