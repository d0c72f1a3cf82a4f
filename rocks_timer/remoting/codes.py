"""RocketMQ remoting request and response codes (the numbers of ``RequestCode`` and
``ResponseCode`` in apache/rocketmq), the ones this front speaks."""
from __future__ import annotations


class Request:
    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    GET_BROKER_RUNTIME_INFO = 28
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    GET_CONSUMER_LIST_BY_GROUP = 38
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    SEND_MESSAGE_V2 = 310
    SEND_BATCH_MESSAGE = 320
    RECALL_MESSAGE = 370


class Response:
    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    TOPIC_NOT_EXIST = 17
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    INVALID_PARAMETER = 29
    ILLEGAL_OPERATION = 604


# LanguageCode: the byte the ROCKETMQ binary header carries, by name.
LANGUAGES = ("JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP",
             "GO", "PHP", "OMS", "RUST")
LANGUAGE_CODES = {name: code for code, name in enumerate(LANGUAGES)}

# The version this front answers with and registers as: RocketMQ 4.9.4 (``MQVersion``'s
# ordinal), a version every 4.x client and the 5.x NameServer accept.
VERSION = 584
