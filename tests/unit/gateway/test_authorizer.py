"""AclAuthorizer decisions, binding filters and the ZooKeeper JSON of ACLs."""

from __future__ import annotations

import json

import pytest

from services.common.acl import (
    Binding,
    BindingFilter,
    Entry,
    Operation,
    PatternType,
    Permission,
    Resource,
    ResourceType,
    entries_json,
    invalid_binding,
    parse_entries,
)
from services.common.zk.acls import resource_path
from services.gateway.authorizer import Authorizer, parse_super_users, peer_host

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
O, P = Operation, Permission  # noqa: E741 - short names keep the cases readable


def b(rtype: ResourceType, name: str, pattern: PatternType, principal: str, op: Operation,
      perm: Permission = P.ALLOW, host: str = "*") -> Binding:  # fmt: skip
    return Binding(Resource(rtype, name, pattern), Entry(principal, host, op, perm))


def authz(*bindings: Binding, allow_if_no_acl: bool = False) -> Authorizer:
    a = Authorizer(parse_super_users("User:admin; User:ops"), allow_if_no_acl)
    a.load(list(bindings))
    return a


def test_literal_prefixed_wildcard_and_implied_describe() -> None:
    a = authz(
        b(T, "orders-", PRE, "User:alice", O.READ),
        b(T, "audit", LIT, "User:*", O.WRITE),
        b(T, "*", LIT, "User:bob", O.ALTER_CONFIGS),
    )
    assert a.authorize("User:alice", "10.0.0.1", O.READ, T, "orders-eu")
    assert a.authorize("User:alice", "10.0.0.1", O.DESCRIBE, T, "orders-eu")  # implied by READ
    assert not a.authorize("User:alice", "10.0.0.1", O.WRITE, T, "orders-eu")
    assert not a.authorize("User:alice", "10.0.0.1", O.READ, T, "order")  # not the prefix
    assert a.authorize("User:carol", "h", O.WRITE, T, "audit")  # User:* principal
    assert a.authorize("User:bob", "h", O.DESCRIBE_CONFIGS, T, "anything")  # wildcard name
    assert not a.authorize("User:bob", "h", O.DESCRIBE, T, "anything")  # ALTER_CONFIGS != ALTER
    assert not a.authorize("User:alice", "h", O.READ, G, "orders-eu")  # other resource type


def test_deny_wins_super_users_and_no_acl() -> None:
    a = authz(
        b(T, "pay", PRE, "User:alice", O.ALL),
        b(T, "payroll", LIT, "User:alice", O.READ, P.DENY),
        b(T, "hosts", LIT, "User:alice", O.READ, host="10.0.0.1"),
    )
    assert a.authorize("User:alice", "h", O.READ, T, "payments")
    assert not a.authorize("User:alice", "h", O.READ, T, "payroll")  # DENY over ALLOW ALL
    assert a.authorize("User:alice", "h", O.WRITE, T, "payroll")  # the DENY is READ only
    assert a.authorize("User:admin", "h", O.READ, T, "payroll")  # super user
    assert a.authorize("User:alice", "10.0.0.1", O.READ, T, "hosts")
    assert not a.authorize("User:alice", "10.0.0.2", O.READ, T, "hosts")
    assert not a.authorize("User:alice", "h", O.READ, T, "no-acls")
    assert authz(allow_if_no_acl=True).authorize("User:x", "h", O.READ, T, "no-acls")
    # a resource with ACLs (for someone else) is not "no ACL found"
    assert not authz(b(T, "t", LIT, "User:y", O.READ), allow_if_no_acl=True).authorize(
        "User:x", "h", O.READ, T, "t"
    )


def test_authorize_any_for_idempotent_producers() -> None:
    a = authz(b(T, "logs-", PRE, "User:alice", O.WRITE))
    assert a.authorize_any("User:alice", "h", O.WRITE, T)
    assert not a.authorize_any("User:bob", "h", O.WRITE, T)


@pytest.mark.parametrize(
    ("flt", "expected"),
    [
        (BindingFilter(1, None, 1, None, None, 1, 1), {"orders-", "orders-eu", "*"}),
        (BindingFilter(2, "orders-eu", 2, None, None, 1, 1), {"orders-", "orders-eu", "*"}),
        (BindingFilter(2, "orders-eu", 3, None, None, 1, 1), {"orders-eu"}),
        (BindingFilter(2, None, 4, None, None, 1, 1), {"orders-"}),
        (BindingFilter(2, None, 1, "User:bob", None, 1, 1), {"*"}),
        (BindingFilter(2, None, 1, None, None, 4, 1), {"orders-eu"}),
        (BindingFilter(2, None, 1, None, None, 1, 2), {"orders-eu"}),
    ],
)
def test_filters_as_kafka(flt: BindingFilter, expected: set[str]) -> None:
    bindings = [
        b(T, "orders-", PRE, "User:alice", O.READ),
        b(T, "orders-eu", LIT, "User:alice", O.WRITE, P.DENY),
        b(T, "*", LIT, "User:bob", O.DESCRIBE),
    ]
    assert flt.invalid() is None
    assert {x.resource.name for x in bindings if flt.matches(x)} == expected


def test_invalid_filters_and_bindings() -> None:
    assert BindingFilter(0, None, 1, None, None, 1, 1).invalid()
    assert BindingFilter(2, None, 9, None, None, 1, 1).invalid()
    assert invalid_binding(b(T, "t", PatternType.MATCH, "User:a", O.READ))
    assert invalid_binding(b(C, "other", LIT, "User:a", O.ALTER))
    assert invalid_binding(b(T, "t", LIT, "alice", O.READ))  # no principal type
    assert invalid_binding(b(T, "t", LIT, "User:a", O.ANY))
    assert invalid_binding(b(C, "kafka-cluster", LIT, "User:a", O.ALTER)) is None


def test_zookeeper_json_and_paths_as_kafka() -> None:
    entries = [Entry("User:alice", "*", O.IDEMPOTENT_WRITE, P.ALLOW)]
    assert json.loads(entries_json(entries)) == {
        "version": 1,
        "acls": [
            {
                "principal": "User:alice",
                "permissionType": "Allow",
                "operation": "IdempotentWrite",
                "host": "*",
            }
        ],
    }
    assert parse_entries(entries_json(entries)) == entries
    tid = Resource(ResourceType.TRANSACTIONAL_ID, "tx", LIT)
    assert resource_path(tid) == "/kafka-acl/TransactionalId/tx"
    assert (
        resource_path(Resource(T, "orders-", PRE)) == "/kafka-acl-extended/prefixed/Topic/orders-"
    )


def test_peer_host() -> None:
    assert peer_host("10.0.0.1:5555") == "10.0.0.1"
    assert peer_host("::1:5555") == "::1"


def test_every_api_the_gateway_serves_has_an_authorization_rule() -> None:
    from services.gateway.authz import NO_RULE, RULES
    from services.gateway.handlers import HANDLERS

    assert set(RULES) | set(NO_RULE) == set(HANDLERS)
    assert not set(RULES) & set(NO_RULE)


def test_rule_fields_exist_in_the_messages() -> None:
    """Every request/response field a rule names is a field of that API in some version it
    serves (a typo would silently skip the check)."""
    from services.common.protocol import SUPPORTED_VERSIONS
    from services.common.protocol.schema import message_spec
    from services.gateway.authz import RULES

    def names(key: int, kind: str) -> set[str]:
        lo, hi = SUPPORTED_VERSIONS[key]
        out: set[str] = set()
        for v in range(lo, hi + 1):
            out |= {f.name for f in message_spec(key, v, kind).fields}  # type: ignore[arg-type]
        return out

    for key, rule in RULES.items():
        req, resp = names(key, "request"), names(key, "response")
        for flt in rule.entries:
            assert flt.request_field in req, (key, flt.request_field)
            assert flt.response_field in resp, (key, flt.response_field)
        for rf in rule.responses:
            assert rf.field in resp, (key, rf.field)
