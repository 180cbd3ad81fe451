"""Long-lived streams are lent to one owner at a time and reused after they are given back
(cuda/streams.py): two pipelines open at once never share a stream."""

import types

from fullpipe.cuda import streams as st


def test_streams_are_lent_to_one_owner_at_a_time_and_reused(monkeypatch):
    made = []

    def create(device, priority=None):
        made.append(object())
        return made[-1]

    monkeypatch.setattr(st, "_as_core_device", lambda device: types.SimpleNamespace(device_id=0))
    monkeypatch.setattr(st, "create_stream", create)
    monkeypatch.setattr(st, "_free_streams", {})
    a = st.long_lived_streams(None, 3)
    b = st.long_lived_streams(None, 2)
    assert not {id(s) for s in a} & {id(s) for s in b}  # both open: nothing shared
    st.return_streams(None, a)
    c = st.long_lived_streams(None, 4)
    assert [id(s) for s in c[:3]] == [id(s) for s in a]  # given back: lent again, never destroyed
    assert len(made) == 6
    assert st.long_lived_streams(None, 1, priority=-1)[0] not in a + b + c  # priorities are kept apart
