"""The remoting front's JSON header writer (``command.encode_json_header``, piece by piece)
against its reference (``command.json_header``, the json module): the same bytes for any
header, and the reference taken for a header whose fields are not all text."""
from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from rocks_timer.remoting.command import (RemotingCommand, decode, encode_json_header,
                                          json_header)

TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)  # any but surrogates
INT32 = st.integers(-2**31, 2**31 - 1)


@settings(max_examples=400, deadline=None)
@given(code=INT32, opaque=INT32, flag=st.integers(0, 3), version=INT32,
       language=st.sampled_from(["JAVA", "CPP", "PYTHON", "OTHER"]) | TEXT,
       remark=st.none() | TEXT, ext=st.dictionaries(TEXT, TEXT, max_size=8))
def test_the_written_header_is_the_references_byte_for_byte(code, opaque, flag, version,
                                                              language, remark, ext):
    cmd = RemotingCommand(code, opaque, flag, remark, ext, language=language, version=version)
    assert encode_json_header(cmd) == json_header(cmd)
    back = decode(int.from_bytes(cmd.encode()[4:8], "big"), cmd.encode()[8:])
    assert (back.code, back.opaque, back.flag, back.remark, back.ext, back.version) == \
        (code, opaque, flag, remark, ext, version)


def test_a_header_with_fields_not_all_text_goes_through_the_reference():
    for cmd in (RemotingCommand(0, 1, ext={"queueId": 3}),       # a number among the fields
                RemotingCommand(True, 1, ext={"a": "b"})):        # a bool where a code goes
        assert encode_json_header(cmd) == json_header(cmd)
    header = encode_json_header(RemotingCommand(0, 1, ext={"queueId": 3}))
    assert json.loads(header)["extFields"] == {"queueId": 3}
