"""The engine's Lua assembly and how a client calls it: scripts, bundles, channels."""
