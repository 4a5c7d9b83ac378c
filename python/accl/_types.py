"""Reduction-op and element-type codes, with the values of acclRedOp_t and acclDataType_t."""

SUM, PROD, MAX, MIN, AVG = 0, 1, 2, 3, 4

INT8, UINT8, INT32, UINT32, INT64, UINT64 = 0, 1, 2, 3, 4, 5
FLOAT16, FLOAT32, FLOAT64, BFLOAT16, FLOAT8_E4M3, FLOAT8_E5M2 = 6, 7, 8, 9, 10, 11

# Python-only code for bool arrays: they travel as uint8 (see _buffers.wire and Communicator).
BOOL = -1

DTYPE_NAMES = {
    INT8: "int8",
    UINT8: "uint8",
    INT32: "int32",
    UINT32: "uint32",
    INT64: "int64",
    UINT64: "uint64",
    FLOAT16: "float16",
    FLOAT32: "float32",
    FLOAT64: "float64",
    BFLOAT16: "bfloat16",
    FLOAT8_E4M3: "float8_e4m3",
    FLOAT8_E5M2: "float8_e5m2",
    BOOL: "bool",
}

ITEMSIZE = {
    INT8: 1,
    UINT8: 1,
    INT32: 4,
    UINT32: 4,
    INT64: 8,
    UINT64: 8,
    FLOAT16: 2,
    FLOAT32: 4,
    FLOAT64: 8,
    BFLOAT16: 2,
    FLOAT8_E4M3: 1,
    FLOAT8_E5M2: 1,
    BOOL: 1,
}

OP_NAMES = {SUM: "sum", PROD: "prod", MAX: "max", MIN: "min", AVG: "avg"}
