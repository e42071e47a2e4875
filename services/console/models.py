"""The REST API's request and response bodies (they make its OpenAPI schema)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

TOPIC_NAME = r"^[a-zA-Z0-9._-]{1,249}$"
# kafka-consumer-groups.sh's reset scenarios (``--from-file`` needs a file: CLI only)
ResetScenario = Literal[
    "to_earliest", "to_latest", "to_offset", "to_datetime", "by_duration", "shift_by", "to_current"
]


class ErrorBody(BaseModel):
    error: str = Field(description="one readable line, as the CLI prints it")


class Info(BaseModel):
    read_only: bool
    bootstrap_servers: str


class StorageNode(BaseModel):
    id: int
    address: str | None
    zone: str | None
    live: bool
    leaders: int
    replicas: int


class Gateway(BaseModel):
    id: int
    address: str
    zone: str | None


class ClusterOverview(BaseModel):
    controller_id: int | None
    storage_nodes: list[StorageNode]
    gateways: list[Gateway]
    topics: int
    partitions: int
    under_replicated_partitions: int
    offline_partitions: int


class TopicSummary(BaseModel):
    name: str
    internal: bool
    partitions: int
    replication_factor: int
    under_replicated_partitions: int
    offline_partitions: int
    marked_for_deletion: bool


class PartitionInfo(BaseModel):
    partition: int
    leader: int | None
    replicas: list[int]
    isr: list[int]
    adding: list[int]
    removing: list[int]
    under_replicated: bool
    earliest_offset: int | None
    latest_offset: int | None


class ConfigInfo(BaseModel):
    name: str
    value: str | None
    source: str
    is_default: bool
    read_only: bool
    sensitive: bool


class TopicDetail(BaseModel):
    name: str
    topic_id: str | None
    internal: bool
    marked_for_deletion: bool
    partitions: list[PartitionInfo]
    configs: list[ConfigInfo]


class TopicCreate(BaseModel):
    name: str = Field(pattern=TOPIC_NAME)
    partitions: int = Field(1, ge=1, le=1000, description="at most 1,000 from the console")
    replication_factor: int = Field(1, ge=1, le=32767)
    configs: dict[str, str] = Field(default_factory=dict)


class ConfigChange(BaseModel):
    set: dict[str, str] = Field(default_factory=dict)
    delete: list[str] = Field(default_factory=list)


class Header(BaseModel):
    key: str
    value: str | None
    encoding: Literal["utf8", "base64", "null"]


class RecordInfo(BaseModel):
    offset: int
    timestamp: int
    timestamp_type: Literal["CreateTime", "LogAppendTime"]
    key: str | None
    key_encoding: Literal["utf8", "base64", "null"]
    value: str | None
    value_encoding: Literal["utf8", "base64", "null"]
    headers: list[Header]


class RecordPage(BaseModel):
    topic: str
    partition: int
    start_offset: int
    next_offset: int
    log_end_offset: int
    records: list[RecordInfo]


class ProduceHeader(BaseModel):
    key: str = Field(min_length=1)
    value: str


class ProduceRequest(BaseModel):
    key: str | None = None
    value: str | None = None
    partition: int | None = Field(None, ge=0)
    headers: list[ProduceHeader] = Field(default_factory=list)


class ProduceResult(BaseModel):
    topic: str
    partition: int
    offset: int


class GroupSummary(BaseModel):
    group: str
    state: str


class AssignedPartition(BaseModel):
    topic: str
    partition: int


class GroupMember(BaseModel):
    consumer_id: str
    host: str
    client_id: str
    assignment: list[AssignedPartition]


class GroupOffset(BaseModel):
    topic: str
    partition: int
    current_offset: int | None
    log_end_offset: int
    lag: int | None
    consumer_id: str | None
    host: str | None
    client_id: str | None


class LagSample(BaseModel):
    time: float = Field(description="seconds since the epoch")
    lag: int


class GroupDetail(BaseModel):
    group: str
    state: str
    coordinator: str
    assignment_strategy: str
    members: list[GroupMember]
    offsets: list[GroupOffset]
    total_lag: int
    lag_history: list[LagSample]


class ResetRequest(BaseModel):
    scenario: ResetScenario
    value: str | None = Field(
        None, description="the scenario's argument: offset, datetime, ISO duration or shift"
    )
    topics: list[str] = Field(default_factory=list, description="'topic' or 'topic:0,1'")
    all_topics: bool = False
    execute: bool = Field(False, description="false: dry run (the default, as the CLI)")


class ResetRow(BaseModel):
    topic: str
    partition: int
    new_offset: int


class ResetResult(BaseModel):
    group: str
    executed: bool
    offsets: list[ResetRow]
