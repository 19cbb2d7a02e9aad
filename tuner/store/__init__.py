"""The study's store: Optuna storage, the cross-worker lock, heartbeats for journal files.

    storage     build_storage: RDB (SQLite, PostgreSQL) with heartbeats, or a journal file
    retry       RetryingStorage: every call retried through an outage of up to storage.retry_s
    locking     store_lock: a PostgreSQL advisory lock or a file lock, for steps that must not race
    heartbeat   JournalHeartbeat: stale-trial detection for journal studies (Optuna beats RDB only)
"""
