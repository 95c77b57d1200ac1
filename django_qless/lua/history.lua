-- history.lua: job history: the compact first visit in the job hash and the history list.
--
--@ helpers
--
-- Commands: none (helpers only).
-- Keys:
--   ql:j:<jid>            hash  field `history` = compact first visit in qless-core's legacy
--                               format (HDEL on migration to the list)
--   ql:j:<jid>-history    list  JSON history entries (RPUSH, LRANGE, LSET/LREM/LPOP/LTRIM/LPUSH)

-- ---------------------------------------------------------------- history

-- Text of floor(t), as cjson writes it (both use 14 significant digits). Remembers the last
-- one: a call formats its `now` once however many entries and fields it writes.
local floor_t, floor_s
function Q.floor_text(t)
  local f = floor(t)
  if f ~= floor_t then floor_t, floor_s = f, tostring(f) end
  return floor_s
end

-- JSON text of a worker name (remembered: pop and complete of one call share it).
local worker_n, worker_s
function Q.worker_json(worker)
  if worker ~= worker_n then worker_n, worker_s = worker, cjson_encode(worker) end
  return worker_s
end

local function history_entry(when, what, extra)
  if extra then return cjson_encode({ floor(when), what, extra }) end
  -- (what cjson writes for the 2-element array, without building one)
  return '[' .. Q.floor_text(when) .. ',' .. cjson_encode(what) .. ']'
end

-- The `popped` entry's text (what history_entry writes for it).
function Q.popped_entry(when, worker)
  return '[' .. Q.floor_text(when) .. ',"popped",{"worker":' .. Q.worker_json(worker) .. '}]'
end

-- Compact history. A job's first visit (put, popped, done) lives in the job hash field
-- `history`, in qless-core's own legacy encoding: a JSON array of visit objects with `q`,
-- `put`, `popped`, `worker`, `failed`, `done` timestamps. qless-core (and this engine) expand
-- that field into list entries and delete it on first touch, so the field plus the list always
-- read as the list alone would. The engine writes it only for a job's first event, extends it
-- for the first pop and the completion, and migrates on any other event.

-- The list entries a legacy `history` field stands for (after whatever the list holds).
local function legacy_entries(legacy)
  -- Fast path for the engine's own shapes (a bare first put, or put + popped): the entries
  -- are spliced from the field's text, which holds the very number and string texts cjson
  -- writes; anything unusual (leading zeros, other keys, non-canonical escapes) goes the
  -- generic way below.
  local q, put, rest = legacy:match('^%[{"q":"([%w_%.%-]*)","put":([1-9]%d*)(.*)$')
  if q and #put <= 14 then
    local first = '[' .. put .. ',"put",{"q":"' .. q .. '"}]'
    if rest == '}]' then return { first } end
    local popped, wtext = rest:match('^,"popped":([1-9]%d*),"worker":(".*")}%]$')
    if popped and #popped <= 14 then
      local ok, w = pcall(cjson_decode, wtext)
      if ok and type(w) == 'string' and cjson_encode(w) == wtext then
        return { first, '[' .. popped .. ',"popped",{"worker":' .. wtext .. '}]' }
      end
    end
  end
  local entries = {}
  local ok, old = pcall(cjson_decode, legacy)
  if not ok or type(old) ~= 'table' then return entries end
  for _, h in ipairs(old) do
    if type(h) == 'table' then
      if h.put then tinsert(entries, history_entry(h.put, 'put', { q = h.q })) end
      if h.popped then tinsert(entries, history_entry(h.popped, 'popped', { worker = h.worker })) end
      if h.failed then tinsert(entries, history_entry(h.failed, 'failed', { worker = h.worker })) end
      if h.done then tinsert(entries, history_entry(h.done, 'done')) end
    end
  end
  return entries
end
Q.legacy_entries = legacy_entries

-- Redis keeps a small hash in its compact encoding (listpack/ziplist) only while every value
-- is at most `hash-max-listpack-value` bytes (default 64); one longer value converts the job
-- hash to a real hash table for good, which costs far more than a history list. So the field
-- only grows past this length when the hash already holds a longer value (`roomy`).
Q.SMALL_VALUE = 64

-- True when one of the given field values is longer than Q.SMALL_VALUE.
-- (at most six values, as fixed parameters: a vararg loop costs two C calls per value)
local function long(v) return type(v) == 'string' and #v > Q.SMALL_VALUE end
function Q.roomy(a, b, c, d, e, f)
  return long(a) or long(b) or long(c) or long(d) or long(e) or long(f)
end

-- Field text of a first visit that starts with a put (floor(when), as list entries use), or
-- nil when it would not fit.
function Q.compact_put(queue, when, roomy)
  local text = '[{"q":' .. cjson_encode(queue) .. ',"put":' .. cjson_encode(floor(when)) .. '}]'
  if #text > Q.SMALL_VALUE and not roomy then return nil end
  return text
end

-- The field with the first pop added and {put time, queue, pop time, worker}, or nil when
-- the field is not a bare first put. `h`: the job hash (its long values make room); the
-- length is checked before any text is built, since with a `host-pid` worker name it rarely fits.
function Q.compact_popped(legacy, when, worker, h)
  local at = floor(when)
  -- (cjson writes 14 significant digits: larger times take the generic path)
  if at >= 1e14 then return nil end
  local atext, wtext = Q.floor_text(when), Q.worker_json(worker)
  if #legacy + 20 + #atext + #wtext > Q.SMALL_VALUE
      and not Q.roomy(h.data, h.klass, h.tags, h.failure, h.throttles, h.held) then
    return nil
  end
  local queue, put = legacy:match('^%[{"q":"([%w_%.%-]*)","put":(%d+)}%]$')
  if not queue then return nil end
  local text = legacy:sub(1, -3) .. ',"popped":' .. atext .. ',"worker":' .. wtext .. '}]'
  return text, { tonumber(put), queue, at, worker }
end

-- The field with the completion added, or nil unless it is a first put + pop by `worker`.
-- `h`: the job hash as complete read it and `data` the new data (long values make room).
function Q.compact_done(legacy, when, worker, jid, h, data)
  local head = legacy:match('^%[{"q":"[%w_%.%-]*","put":%d+,"popped":%d+')
  if not head then return nil end
  local tail = ',"worker":' .. Q.worker_json(worker) .. '}]'
  if #head + #tail ~= #legacy or legacy:sub(#head + 1) ~= tail then return nil end
  local text = legacy:sub(1, -3) .. ',"done":' .. Q.floor_text(when) .. '}]'
  if #text > Q.SMALL_VALUE and not Q.roomy(data, h.held) and not Q.long_values(jid) then
    return nil
  end
  return text
end

-- The `time` field text: 14 significant digits when that reads back as the same number,
-- else 17 (always exact); qless-core reads it with tonumber.
local ftime_t, ftime_s
function Q.ftime(t)
  -- (remembered: pop and complete of one call write the same `now`)
  if t == ftime_t then return ftime_s end
  local text = tostring(t)
  -- (`text + 0` parses once where tonumber parses twice; only inf and nan do not read back)
  local back = (t == t and t ~= math.huge and t ~= -math.huge) and text + 0 or nil
  if back ~= t then text = string.format('%.17g', t) end
  ftime_t, ftime_s = t, text
  return text
end

-- Push entries in chunks; returns the list length.
local function push_entries(key, entries)
  local len = 0
  for i = 1, #entries, Q.CHUNK do
    len = rcall('RPUSH', key, unpack(entries, i, math.min(i + Q.CHUNK - 1, #entries)))
  end
  return len
end

-- Expand a legacy single-field `history` array into list entries and drop the field.
function Q.migrate_history(jid, legacy)
  rcall('HDEL', KP .. 'j:' .. jid, 'history')
  push_entries(Q.khist(jid), legacy_entries(legacy))
end

-- Append a history entry (after migrating `legacy`, the job's `history` field, if given, in
-- the same RPUSH); trim to max-job-history (keep the first entry and the last n-1).
-- `overwrite`: the caller's own HSET replaces the field with `[]` (an empty legacy history,
-- which every reader expands to nothing) instead of an HDEL here.
-- Returns the pushed entries when they are now the whole list (it was empty), else nil.
function Q.history(jid, when, what, extra, legacy, overwrite)
  return Q.history_text(jid, history_entry(when, what, extra), legacy, overwrite)
end

-- Q.history with the entry's JSON text already built.
function Q.history_text(jid, entry, legacy, overwrite)
  local key = Q.khist(jid)
  local len
  local entries
  if legacy == '[]' then legacy = nil end
  if legacy then
    if not overwrite then rcall('HDEL', KP .. 'j:' .. jid, 'history') end
    entries = legacy_entries(legacy)
    tinsert(entries, entry)
    len = push_entries(key, entries)
  else
    entries = { entry }
    len = rcall('RPUSH', key, entry)
  end
  -- The cap is 0 (none) or >= 3, so a list of 3 or fewer entries never needs a trim.
  if len <= 3 then
    if len == #entries then return entries end
    return nil
  end
  local n = Q.cfgnum('max-job-history', 100)
  if n < 3 or len <= n then return end
  if len == n + 1 then
    rcall('LSET', key, 1, '__qless_trim__')
    rcall('LREM', key, 1, '__qless_trim__')
  else
    local first = rcall('LPOP', key)
    rcall('LTRIM', key, -(n - 1), -1)
    rcall('LPUSH', key, first)
  end
end
