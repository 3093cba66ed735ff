//! Table definitions of the export schema the writer produces: the column names, types and
//! `NOT NULL` constraints of Nsight Systems 3.25.0 exports (`TARGET_INFO_GPU`, which 3.25
//! exports of multi-GPU runs omit, as in 3.24.14), plus one table of our own.
//!
//! nsys' own tools (`nsys stats`) find columns by name, so the names and order matter more
//! than the exact set; keeping the full column lists lets a written file pass for an export.

/// The schema version whose columns the tables below reproduce.
pub(crate) const SCHEMA_VERSION: (u32, u32, u32) = (3, 25, 0);

/// Name of the table where shardscope keeps what nsys has no column for: each process's rank,
/// world size and host. nsys ignores tables it does not know.
pub(crate) const PROCESS_INFO_TABLE: &str = "SHARDSCOPE_PROCESS_INFO";

/// The capture windows of a capture taken in windows (`shardscope_model::CaptureWindow`): one row per window
/// and process, created only when there are windows. Times on the session clock like every event.
pub(crate) const CAPTURE_WINDOWS_TABLE: &str = "SHARDSCOPE_CAPTURE_WINDOWS";

/// `CREATE TABLE` of [`CAPTURE_WINDOWS_TABLE`].
pub(crate) const CREATE_CAPTURE_WINDOWS: &str = "CREATE TABLE SHARDSCOPE_CAPTURE_WINDOWS (
        globalPid INTEGER NOT NULL,
        start INTEGER NOT NULL,
        end INTEGER NOT NULL,
        startTrigger TEXT NOT NULL,
        endTrigger TEXT NOT NULL)";

/// `CREATE TABLE` of nsys' graph-level table (`--cuda-graph-trace=graph`), created only when graphs were
/// recorded whole.
pub(crate) const CREATE_GRAPH_TRACE: &str = "CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (
        start INTEGER NOT NULL,
        end INTEGER NOT NULL,
        deviceId INTEGER NOT NULL,
        contextId INTEGER NOT NULL,
        greenContextId INTEGER,
        streamId INTEGER NOT NULL,
        correlationId INTEGER,
        globalPid INTEGER,
        graphId INTEGER NOT NULL,
        graphExecId INTEGER NOT NULL)";

/// `CREATE TABLE` statements, in the order they are created.
pub(crate) const CREATE_TABLES: &[&str] = &[
    "CREATE TABLE StringIds (
        id INTEGER NOT NULL PRIMARY KEY,
        value TEXT NOT NULL)",
    "CREATE TABLE META_DATA_EXPORT (
        name TEXT NOT NULL,
        value TEXT)",
    "CREATE TABLE TARGET_INFO_SESSION_START_TIME (
        utcEpochNs INTEGER,
        utcTime TEXT,
        localTime TEXT,
        systemClockNs INTEGER)",
    "CREATE TABLE TARGET_INFO_GPU (
        vmId INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT, busLocation TEXT, isDiscrete INTEGER,
        l2CacheSize INTEGER, totalMemory INTEGER, memoryBandwidth INTEGER, clockRate INTEGER, smCount INTEGER,
        pwGpuId INTEGER, uuid TEXT, luid INTEGER, chipName TEXT, cuDevice INTEGER, ctxswDevPath TEXT,
        ctrlDevPath TEXT, revision INTEGER, nodeMask INTEGER, constantMemory INTEGER, maxIPC INTEGER,
        maxRegistersPerBlock INTEGER, maxShmemPerBlock INTEGER, maxShmemPerBlockOptin INTEGER,
        maxShmemPerSm INTEGER, maxRegistersPerSm INTEGER, threadsPerWarp INTEGER, asyncEngines INTEGER,
        maxWarpsPerSm INTEGER, maxBlocksPerSm INTEGER, maxThreadsPerBlock INTEGER, maxBlockDimX INTEGER,
        maxBlockDimY INTEGER, maxBlockDimZ INTEGER, maxGridDimX INTEGER, maxGridDimY INTEGER, maxGridDimZ INTEGER,
        computeMajor INTEGER, computeMinor INTEGER, smMajor INTEGER, smMinor INTEGER)",
    "CREATE TABLE PROCESSES (
        globalPid INTEGER,
        pid INTEGER,
        name TEXT)",
    "CREATE TABLE ThreadNames (
        nameId INTEGER NOT NULL,
        priority INTEGER,
        globalTid INTEGER)",
    "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (
        start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL,
        greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
        demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, mangledName INTEGER, launchType INTEGER,
        cacheConfig INTEGER, registersPerThread INTEGER NOT NULL, gridX INTEGER NOT NULL, gridY INTEGER NOT NULL,
        gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL, blockY INTEGER NOT NULL, blockZ INTEGER NOT NULL,
        staticSharedMemory INTEGER NOT NULL, dynamicSharedMemory INTEGER NOT NULL,
        localMemoryPerThread INTEGER NOT NULL, localMemoryTotal INTEGER NOT NULL, gridId INTEGER NOT NULL,
        sharedMemoryExecuted INTEGER, graphNodeId INTEGER, sharedMemoryLimitConfig INTEGER,
        qmdBulkReleaseDone INTEGER, qmdPreexitDone INTEGER, qmdLastCtaDone INTEGER, graphId INTEGER,
        clusterX INTEGER, clusterY INTEGER, clusterZ INTEGER, clusterSchedulingPolicy INTEGER,
        maxPotentialClusterSize INTEGER, maxActiveClusters INTEGER, sharedMemoryRequestedPercentage INTEGER,
        tensorSizeMinusOneElements TEXT NOT NULL)",
    "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (
        start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL,
        greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
        bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL, deprecatedSrcId INTEGER, srcKind INTEGER,
        dstKind INTEGER, srcDeviceId INTEGER, srcContextId INTEGER, dstDeviceId INTEGER, dstContextId INTEGER,
        migrationCause INTEGER, graphNodeId INTEGER, virtualAddress INTEGER, copyCount INTEGER)",
    "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (
        start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL,
        greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
        value INTEGER NOT NULL, bytes INTEGER NOT NULL, graphNodeId INTEGER, memKind INTEGER)",
    "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (
        start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL, globalTid INTEGER,
        correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, callchainId INTEGER)",
    "CREATE TABLE NVTX_EVENTS (
        start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER, category INTEGER,
        color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER, domainId INTEGER,
        uint64Value INTEGER, int64Value INTEGER, doubleValue REAL, uint32Value INTEGER, int32Value INTEGER,
        floatValue REAL, jsonTextId INTEGER, jsonText TEXT, binaryData TEXT)",
    "CREATE TABLE SHARDSCOPE_PROCESS_INFO (
        globalPid INTEGER NOT NULL,
        rank INTEGER,
        worldSize INTEGER,
        host TEXT)",
];
