"""Structured Streaming: any Laredo source as a stream (:mod:`.reader`), its change frame
(:mod:`.changes`) and the ``foreachBatch`` sinks (:mod:`.target_sink`, :mod:`.snapshot_sink`).
"""
