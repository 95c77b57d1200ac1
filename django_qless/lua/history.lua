-- history.lua: job history: the compact first visit in the job hash and the history list.
--
--@ helpers
--
-- Commands: none (helpers only).
-- Keys:
--   ql:j:<jid>            hash  field `visit` = first visit after its pop (HMGET, HDEL on
--                               migration); field `history` = a legacy single-field history
--                               (read and migrated, no longer written)
--   ql:j:<jid>-history    list  JSON history entries (RPUSH, LRANGE, LSET/LREM/LPOP/LTRIM/LPUSH)

-- ---------------------------------------------------------------- history

-- Whether a new job's record is lean (leaves out `jid`, `priority` 0, empty `tags` and
-- `remaining` equal to `retries`, which every engine reader derives): always in a shard
-- keyspace, whose keys no qless-core script can address; in the default keyspace only when
-- the operator sets the config option `lean-job-records` to 1.
-- (Read on every call, once: a copy kept across calls would be shared by every database of
-- the server, which one function library serves.)
function Q.lean_records()
  if KP ~= 'ql:' then return true end
  return Q.cfg('lean-job-records') == '1'
end

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

-- Legacy history. qless-core's older single-field encoding keeps a job's history in the job
-- hash field `history`: a JSON array of visit objects with `q`, `put`, `popped`, `worker`,
-- `failed`, `done` timestamps (earlier versions of this engine wrote it for a first visit).
-- Readers expand it after the list's entries; the next event that writes history migrates
-- it into the list and deletes it, as qless-core does.

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
-- hash to a real hash table for good, which costs far more than a history list. So `visit`
-- never grows past this length: the event goes to the list instead.
Q.SMALL_VALUE = 64

-- The `time` field text: `now` to the millisecond (trailing zeros dropped; rounded, but
-- never into the next second), so floor(time) is floor(now), the second every history
-- entry of the event carries. Still a number to every reader (qless-core reads it with
-- tonumber); statistics move by < 1 ms.
local ftime_t, ftime_s
local ftime_sec, ftime_ms  -- (the second and millisecond of ftime_s, when it is decimal)
local DIGIT = { [0] = '0', '1', '2', '3', '4', '5', '6', '7', '8', '9' }
function Q.ftime(t)
  -- (remembered: pop and complete of one call write the same `now`, and the jobs of one
  -- put.many, 1 µs apart, mostly the same millisecond)
  if t == ftime_t then return ftime_s end
  local text
  if t ~= t or t == math.huge or t == -math.huge or t >= 1e14 or t < 0 then
    text = string.format('%.17g', t)
    ftime_sec = nil
  else
    -- (rounded, as 0.3 s is stored a hair below 0.3; but never up into the next second)
    local s = floor(t)
    local ms = floor((t - s) * 1000 + 0.5)
    if ms > 999 then ms = 999 end
    if s == ftime_sec and ms == ftime_ms then
      ftime_t = t
      return ftime_s
    end
    ftime_sec, ftime_ms = s, ms
    text = Q.floor_text(s)
    -- (the digits written out, trailing zeros dropped: no string.format, whose printf costs
    -- more than the rest of this function)
    if ms > 0 then
      local d3 = ms % 10
      local d2 = (ms - d3) / 10 % 10
      local d1 = (ms - d3 - 10 * d2) / 100
      if d3 > 0 then text = text .. '.' .. DIGIT[d1] .. DIGIT[d2] .. DIGIT[d3]
      elseif d2 > 0 then text = text .. '.' .. DIGIT[d1] .. DIGIT[d2]
      else text = text .. '.' .. DIGIT[d1] end
    end
  end
  ftime_t, ftime_s = t, text
  return text
end

-- First visit without a list. A new job's hash holds no history at all while it waits: its
-- put entry is implied by `time` (the put's, to the millisecond) and `queue`. The first pop
-- writes the hash field `visit` = `<put back>:<queue>:<worker>` (`time` is then the pop's),
-- the completion `<put back>:<pop back>:<queue>:<worker>` (`time` the completion's): whole
-- seconds, the put's before the pop, the pop's before floor(time). Queue and worker names
-- hold no `:`. The first event that does not fit (or any other event) expands it into the
-- list.
-- Rule for readers: with no `history` field, no `visit` field and an empty list, the
-- history is the implied put; a `visit` field's entries come before the list's.

-- The entry texts of a job's first visit: from `visit` when given, else the implied put
-- (none without a `time`).
function Q.visit_entries(visit, time, queue)
  local t = tonumber(time)
  if not t then return {} end
  local at = floor(t)
  if not visit then
    if not queue or queue == '' then return {} end
    return { '[' .. Q.floor_text(at) .. ',"put",{"q":' .. cjson_encode(queue) .. '}]' }
  end
  local a, b, q, w = visit:match('^(%d+):(%d+):([^:]*):(.*)$')
  if not a then
    a, q, w = visit:match('^(%d+):([^:]*):(.*)$')
    if not a then return {} end
  end
  local popat = b and at - tonumber(b) or at
  local put = '[' .. tostring(popat - tonumber(a)) .. ',"put",{"q":' .. cjson_encode(q) .. '}]'
  local popped = '[' .. tostring(popat) .. ',"popped",{"worker":' .. cjson_encode(w) .. '}]'
  if not b then return { put, popped } end
  return { put, popped, '[' .. tostring(at) .. ',"done"]' }
end

-- Texts of whole seconds from 0 to 99 (how long a job waited or ran: usually a few), each
-- made once (tostring formats with printf every time; kept across calls as a Redis 7
-- function).
local second_texts = {}
local function seconds_text(n)
  local text = second_texts[n]
  if text then return text end
  text = tostring(n)
  if n >= 0 and n < 100 then second_texts[n] = text end
  return text
end

-- The `visit` text of a first pop at `now` of a job waiting in its implied first visit, and
-- {put time, queue, pop time, worker} for the reply; nil when it would not fit. `t`: the
-- job's `time` as a number (nil if it holds none).
function Q.visit_popped(t, queue, now, worker)
  if not t or t >= 1e14 or now >= 1e14 or not queue or queue == '' then return nil end
  local put, at = floor(t), floor(now)
  if put > at then return nil end
  local text = seconds_text(at - put) .. ':' .. queue .. ':' .. worker
  if #text > Q.SMALL_VALUE then return nil end
  return text, { put, queue, at, worker }
end

-- The `visit` text with the completion at `now` added (the job's `time`, `t` as a number,
-- is still the pop's), or nil unless `visit` is a first pop by `worker` and the result fits.
function Q.visit_done(visit, t, now, worker)
  if not t or now >= 1e14 then return nil end
  local a, q, w = visit:match('^(%d+):([^:]*):(.*)$')
  if not a or w ~= worker then return nil end
  local at, popat = floor(now), floor(t)
  if popat > at then return nil end
  local text = a .. ':' .. seconds_text(at - popat) .. ':' .. q .. ':' .. w
  if #text > Q.SMALL_VALUE then return nil end
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

-- Q.history with the entry's JSON text already built. With no legacy field and an empty
-- list the job was in its first visit without a list (implied put or `visit` field): those
-- entries go in front (read before the caller's HSET changes `time` or `queue`) and `visit`
-- is deleted. `prior`: the first-visit entries when the caller already knows them (it then
-- deletes `visit` itself).
function Q.history_text(jid, entry, legacy, overwrite, prior)
  local key = Q.khist(jid)
  local len
  local entries
  if legacy == '[]' then legacy = nil end
  if legacy then
    if not overwrite then rcall('HDEL', KP .. 'j:' .. jid, 'history') end
    entries = legacy_entries(legacy)
    tinsert(entries, entry)
    len = push_entries(key, entries)
  elseif prior then
    entries = prior
    tinsert(entries, entry)
    len = push_entries(key, entries)
  else
    entries = { entry }
    len = rcall('RPUSH', key, entry)
    if len == 1 then
      local v = rcall('HMGET', KP .. 'j:' .. jid, 'visit', 'time', 'queue')
      local front = Q.visit_entries(v[1] or nil, v[2] or nil, v[3] or nil)
      if v[1] then rcall('HDEL', KP .. 'j:' .. jid, 'visit') end
      if #front > 0 then
        for i = #front, 1, -1 do rcall('LPUSH', key, front[i]) end
        len = len + #front
        tinsert(front, entry)
        entries = front
      end
    end
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
