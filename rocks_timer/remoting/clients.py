"""``ClientTable``: which clients of which consumer group are alive, from their heartbeats.

A 4.x push consumer rebalances queues over the client ids that GET_CONSUMER_LIST_BY_GROUP lists,
so the table answers that, and says when a group's membership changed (the front then sends
NOTIFY_CONSUMER_IDS_CHANGED to the group's other clients). A client is dropped when it
unregisters, when its connection closes, or when it has not sent a heartbeat for
``expiry_ms`` (RocketMQ's 120 s). Used from the front's event loop only.
"""
from __future__ import annotations

from dataclasses import dataclass, field

EXPIRY_MS = 120_000
MAX_GROUPS_PER_CLIENT = 256
MAX_TOPICS_PER_GROUP = 256


@dataclass
class Member:
    client_id: str
    connection: object
    seen_ms: int
    subscriptions: dict[str, frozenset[str] | None] = field(default_factory=dict)


def parse_tags(expression: str | None) -> frozenset[str] | None:
    """A TAG subscription expression (``*``, ``a || b``) as a set; None = every tag."""
    if expression is None:
        return None
    tags = frozenset(t.strip() for t in expression.split("||") if t.strip())
    return None if not tags or "*" in tags else tags


class ClientTable:
    """Consumer group -> client id -> its connection, last heartbeat and subscriptions."""

    def __init__(self, expiry_ms: int = EXPIRY_MS):
        self.expiry_ms = expiry_ms
        self.groups: dict[str, dict[str, Member]] = {}

    def heartbeat(self, client_id: str, connection, now_ms: int,
                  groups: dict[str, dict[str, frozenset[str] | None]]) -> list[str]:
        """Record a heartbeat; returns the groups whose member list changed."""
        changed = []
        for group, subscriptions in list(groups.items())[:MAX_GROUPS_PER_CLIENT]:
            members = self.groups.setdefault(group, {})
            known = members.get(client_id)
            if known is None or known.connection is not connection:
                changed.append(group)
            members[client_id] = Member(client_id, connection, now_ms,
                                        dict(list(subscriptions.items())[:MAX_TOPICS_PER_GROUP]))
        return changed

    def unregister(self, client_id: str, group: str) -> bool:
        members = self.groups.get(group)
        if not members or members.pop(client_id, None) is None:
            return False
        if not members:
            del self.groups[group]
        return True

    def drop_connection(self, connection) -> list[str]:
        """Forget every client that used ``connection``; returns the groups that changed."""
        changed = []
        for group, members in list(self.groups.items()):
            gone = [cid for cid, m in members.items() if m.connection is connection]
            for cid in gone:
                del members[cid]
            if gone:
                changed.append(group)
            if not members:
                del self.groups[group]
        return changed

    def expire(self, now_ms: int) -> list[str]:
        changed = []
        for group, members in list(self.groups.items()):
            gone = [cid for cid, m in members.items() if now_ms - m.seen_ms > self.expiry_ms]
            for cid in gone:
                del members[cid]
            if gone:
                changed.append(group)
            if not members:
                del self.groups[group]
        return changed

    def client_ids(self, group: str) -> list[str]:
        return sorted(self.groups.get(group, {}))

    def connections(self, group: str) -> list:
        seen, out = set(), []
        for member in self.groups.get(group, {}).values():
            if id(member.connection) not in seen:
                seen.add(id(member.connection))
                out.append(member.connection)
        return out

    def tags(self, group: str, topic: str) -> frozenset[str] | None:
        """The tag filter some live client of ``group`` subscribed ``topic`` with (None: all)."""
        for member in self.groups.get(group, {}).values():
            if topic in member.subscriptions:
                return member.subscriptions[topic]
        return None

    def group_count(self) -> int:
        return len(self.groups)


__all__ = ["ClientTable", "parse_tags"]
