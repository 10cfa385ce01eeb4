"""Contracts shared by the engine, the gateway and the tools: hashes, events and the OpenAI wire format.

Nothing here imports torch: the gateway and the operator depend on it too.
"""
