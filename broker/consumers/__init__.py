"""Consumer groups' requests: HEART_BEAT 34, UNREGISTER_CLIENT 35, GET_CONSUMER_LIST_BY_GROUP 38,
LOCK/UNLOCK_BATCH_MQ 41/42, QUERY/UPDATE_CONSUMER_OFFSET 14/15, GET_MAX/MIN_OFFSET 30/31,
SEARCH_OFFSET_BY_TIMESTAMP 29 (processor.py). The groups' members, queue locks and offsets it
serves are shared state below the core (``broker/state/``)."""
