import pytest

from rocks_timer import BrokerConfig, ConfigError


def test_defaults_validate():
    config = BrokerConfig().validate()
    assert config.timer_engine == "rocksdb" and config.delay_levels.max_level == 18
    assert config.max_delay_ms == 259_200_000


@pytest.mark.parametrize("change,fragment", [
    ({"timer_engine": "redis"}, "timer_engine='redis'"),
    ({"timer_precision_ms": 0}, "timer_precision_ms=0"),
    ({"message_delay_level": "5x"}, "'5x'"),
    ({"message_delay_level": "1s  5s"}, "element 2"),
    ({"flush_disk_type": "maybe"}, "flush_disk_type"),
    ({"commitlog_segment_size": 1000}, "commitlog_segment_size=1000"),
    ({"timer_max_in_flight": True}, "timer_max_in_flight=True"),
])
def test_bad_values_name_the_field_and_the_limit(change, fragment):
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(")):
        BrokerConfig(**change).validate()


def test_unknown_keys_list_the_valid_ones():
    with pytest.raises(ConfigError, match="unknown config key.*valid keys:.*timer_engine"):
        BrokerConfig.from_mapping({"timer_engin": "rocksdb"})


def test_toml(tmp_path):
    path = tmp_path / "broker.toml"
    path.write_text('[broker]\ntimer_engine = "wheel"\ntimer_precision_ms = 500\n')
    config = BrokerConfig.load(path)
    assert config.timer_engine == "wheel" and config.timer_precision_ms == 500


def test_rocketmq_broker_conf(tmp_path):
    path = tmp_path / "broker.conf"
    path.write_text("# comment\nmessageDelayLevel=5s 8s\ntimerPrecisionMs=1000\n"
                    "timerMaxDelaySec=86400\ntimerRollWindowSlot=3600\n"
                    "enableScheduleAsyncDeliver=true\nscheduleAsyncDeliverMaxPendingLimit=100\n"
                    "fileReservedTime=48\nflushDiskType=SYNC_FLUSH\n")
    config = BrokerConfig.load(path)
    assert config.delay_levels.delays_ms == (5000, 8000)
    assert (config.timer_precision_ms, config.timer_max_delay_sec) == (1000, 86400)
    assert config.roll_window_slots == 3600 and config.enable_schedule_async_deliver is True
    assert config.schedule_async_deliver_max_pending_limit == 100
    assert config.file_reserved_hours == 48 and config.flush_disk_type == "sync"


def test_broker_conf_unknown_key_and_bad_value(tmp_path):
    path = tmp_path / "broker.conf"
    path.write_text("brokerNam=x\n")
    with pytest.raises(ConfigError, match="unknown key 'brokerNam'.*messageDelayLevel"):
        BrokerConfig.load(path)
    path.write_text("timerPrecisionMs=fast\n")
    with pytest.raises(ConfigError, match="timer_precision_ms='fast'"):
        BrokerConfig.load(path)
