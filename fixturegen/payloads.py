"""NCCL's NVTX extended payloads as `nsys export --include-blobs=true` keeps them (``--nvtx-payloads``).

NCCL 2.19+ attaches a payload to each API range (``src/include/nvtx_payload_schemas.h``): the
communicator (u64), the message size (size_t, "Message size [bytes]") and, for reductions, the
operation (ncclRedOp_t, an enum). The schema rows and the DDL below are the real exports' (the
NCCL schemas of nsys-ai-2gpu, 2026.2: ids 16777216 + n, offsets NULL for 0; the enum tables of
nccl-net-2rank-2node, 2024.5). ``NVTX_EVENTS.binaryData`` holds, per event, a 32-byte header of
little-endian u64s (domain id, schema id, payload size, header + payload size) and the payload;
no real export at hand holds a blob, so this header is the one documented in docs/json-fields.md
("NVTX payloads": its sources and what is unconfirmed), written so the reader is tested on it.

The size is NCCL's: the whole buffer for an all-reduce, broadcast, send or receive, one rank's
part (sendcount or recvcount x type size) for an all-gather or reduce-scatter.
"""

from __future__ import annotations

import struct

DDL = {
    "NVTX_PAYLOAD_SCHEMAS": """\
CREATE TABLE NVTX_PAYLOAD_SCHEMAS (
    -- NVTX payload schema attributes.

    domainId                    INTEGER,                               -- User-controlled ID that can be used to group events.
    schemaId                    INTEGER,                               -- Identifier of the payload schema.
    name                        TEXT,                                  -- Schema name.
    type                        INTEGER,                               -- Schema type.
    flags                       INTEGER,                               -- Schema flags.
    numEntries                  INTEGER,                               -- Number of payload schema entries.
    payloadSize                 INTEGER,                               -- Size of the static payload.
    alignTo                     INTEGER                                -- Field alignment in bytes.
)""",
    "NVTX_PAYLOAD_SCHEMA_ENTRIES": """\
CREATE TABLE NVTX_PAYLOAD_SCHEMA_ENTRIES (
    -- NVTX payload schema entries.

    domainId                    INTEGER   NOT NULL,                    -- User-controlled ID that can be used to group events.
    schemaId                    INTEGER   NOT NULL,                    -- Identifier of the payload schema.
    idx                         INTEGER   NOT NULL,                    -- Index of the entry in the payload schema.
    flags                       INTEGER,                               -- Payload entry flags.
    type                        INTEGER,                               -- Payload entry type.
    name                        TEXT,                                  -- Label of the payload entry.
    description                 TEXT,                                  -- Description of the payload entry.
    arrayOrUnionDetail          INTEGER,                               -- Array length (index) or selected union member.
    offset                      INTEGER                                -- Entry offset in the binary data in bytes.
)""",
    "NVTX_PAYLOAD_ENUMS": """\
CREATE TABLE NVTX_PAYLOAD_ENUMS (
    -- NVTX payload enum attributes.

    domainId                    INTEGER,                               -- User-controlled ID that can be used to group events.
    schemaId                    INTEGER,                               -- Identifier of the payload schema.
    name                        TEXT,                                  -- Schema name.
    numEntries                  INTEGER,                               -- Number of entries in the enum.
    size                        INTEGER                                -- Size of enumeration type in bytes.
)""",
    "NVTX_PAYLOAD_ENUM_ENTRIES": """\
CREATE TABLE NVTX_PAYLOAD_ENUM_ENTRIES (
    -- NVTX payload enum entries.

    domainId                    INTEGER   NOT NULL,                    -- User-controlled ID that can be used to group events.
    schemaId                    INTEGER   NOT NULL,                    -- Identifier of the payload schema.
    idx                         INTEGER   NOT NULL,                    -- Index of the entry in the payload schema.
    name                        TEXT,                                  -- Name of the enum value.
    value                       INTEGER,                               -- Value of the enum entry.
    isFlag                      INTEGER                                -- Indicates that the entry sets a specific set of bits, which can be used to define bitsets.
)""",
}

COMM, SIZE, INT = 18, 22, 5  # NVTX_PAYLOAD_ENTRY_TYPE_UINT64, _SIZE, _INT
REDOP = 16777232  # the ncclRedOp_t enum's schema id
COMM_NAME, SIZE_NAME, OP_NAME = "NCCL communicator ID", "Message size [bytes]", "Reduction operation"
# schema id -> (payload size, entries (type, name, offset; None for 0, as the exports store it))
SCHEMAS = {
    16777218: (24, [(COMM, COMM_NAME, None), (INT, "No. of ranks", 8), (INT, "Rank", 12), (INT, "CUDA device", 16)]),
    16777220: (16, [(COMM, COMM_NAME, None), (SIZE, SIZE_NAME, 8)]),
    16777223: (24, [(COMM, COMM_NAME, None), (SIZE, SIZE_NAME, 8), (REDOP, OP_NAME, 16)]),
    16777224: (24, [(COMM, COMM_NAME, None), (SIZE, SIZE_NAME, 8), (REDOP, OP_NAME, 16)]),
    16777225: (24, [(COMM, COMM_NAME, None), (SIZE, SIZE_NAME, 8), (INT, "Peer rank", 16)]),
    16777226: (24, [(COMM, COMM_NAME, None), (SIZE, SIZE_NAME, 8), (INT, "Peer rank", 16)]),
}
SCHEMA_OF = {"ncclCommInitRank": 16777218, "ncclAllGather": 16777220, "ncclAllReduce": 16777223,
             "ncclReduceScatter": 16777224, "ncclSend": 16777225, "ncclRecv": 16777226}
REDOPS = ["Sum", "Product", "Max", "Min", "Avg"]
HEADER = 32


def rows(domain: int):
    """(table, columns, rows) of the schema and enum tables."""
    schemas = [(domain, sid, None, 1, None, len(entries), size, None) for sid, (size, entries) in SCHEMAS.items()]
    entries = [(domain, sid, i, None, t, name, None, None, offset)
               for sid, (_, es) in SCHEMAS.items() for i, (t, name, offset) in enumerate(es)]
    return [
        ("NVTX_PAYLOAD_SCHEMAS", ["domainId", "schemaId", "name", "type", "flags", "numEntries", "payloadSize",
                                  "alignTo"], schemas),
        ("NVTX_PAYLOAD_SCHEMA_ENTRIES", ["domainId", "schemaId", "idx", "flags", "type", "name", "description",
                                         "arrayOrUnionDetail", "offset"], entries),
        ("NVTX_PAYLOAD_ENUMS", ["domainId", "schemaId", "name", "numEntries", "size"], [(domain, REDOP, None, 5, 4)]),
        ("NVTX_PAYLOAD_ENUM_ENTRIES", ["domainId", "schemaId", "idx", "name", "value", "isFlag"],
         [(domain, REDOP, i, name, i or None, None) for i, name in enumerate(REDOPS)]),
    ]


def blob(domain: int, api: str, comm_hash: int, nbytes: int = 0, nranks: int = 0, rank: int = 0, peer: int = 0,
         op: int = 0) -> bytes:
    """One event's binaryData: the header, then NCCL's struct for this API call."""
    sid = SCHEMA_OF[api]
    if api == "ncclCommInitRank":
        payload = struct.pack("<QiiiI", comm_hash, nranks, rank, rank, 0)
    elif api == "ncclAllGather":
        payload = struct.pack("<QQ", comm_hash, nbytes)
    elif api in ("ncclSend", "ncclRecv"):
        payload = struct.pack("<QQiI", comm_hash, nbytes, peer, 0)
    else:
        payload = struct.pack("<QQiI", comm_hash, nbytes, op, 0)
    assert len(payload) == SCHEMAS[sid][0]
    return struct.pack("<QQQQ", domain, sid, len(payload), HEADER + len(payload)) + payload
