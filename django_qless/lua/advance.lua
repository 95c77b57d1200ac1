-- advance.lua: the parts of a completion most completions skip: moving the job on to its
-- next queue (`complete ... next`), and the `done` entry of a job past its first visit (the
-- history list). A module complete.lua loads at those branches (Q.need): under EVALSHA each
-- call builds again every helper it can reach, and most completions end a job's first visit.
--
-- Commands: none (complete and complete.reserve are in complete.lua and worker.lua).
-- Keys:
--   ql:j:<jid>                 hash  (HSET; HDEL of `visit`)
--   ql:j:<jid>-history         list  (RPUSH, LPUSH via Q.history, Q.history_text)
--   ql:j:<jid>-dependencies    set   (SADD via Q.add_deps)
--   ql:q:<queue>-work|scheduled|depends  zset (ZADD)
--   ql:queues                  zset  (ZADD NX)
--   ql:config                  hash  (HGET/HSET of #due:<queue>, via Q.lower_due)
--   channels: ql:log, ql:wake:<queue>

Q.mod.advance = function()
  local rcall = Q.rcall

  -- JSON text of a name that passed Q.jid or Q.queue ([A-Za-z0-9_.-]: nothing to escape), as
  -- cjson writes it without the cost of a cjson call.
  local function name_json(v) return '"' .. v .. '"' end

  -- The `done` entry of a completed job whose first visit is over (or never was compact):
  -- the first visit's entries, if any, then `done`, go to the history list.
  function Q.done_entry(jid, key, h, now)
    local prior = h.visit and Q.visit_entries(h.visit, h.time, h.queue) or nil
    Q.history_text(jid, '[' .. Q.floor_text(now) .. ',"done"]', h.history, true, prior)
    if h.visit then rcall('HDEL', key, 'visit') end
  end

  -- Finish a completion with `next` (Q.complete, after its common fields): the job waits in
  -- `nextq` (scheduled after `delay`, or for `depends`); `fields` are the job hash's fields
  -- so far. Returns the job's new state.
  function Q.advance(now, h, jid, key, queue, nextq, delay, depends, token, fields)
    Q.publish(K.log, '{"jid":' .. name_json(jid) .. ',"to":' .. name_json(nextq)
      .. ',"event":"advanced","queue":' .. name_json(queue) .. '}')
    Q.history(jid, now, 'put', { q = nextq })
    rcall('ZADD', K.queues, 'NX', now, nextq)
    table.insert(fields, 'queue'); table.insert(fields, nextq)
    local result
    local ndeps = 0
    if depends and #depends > 0 then
      Q.need('job')  -- (Q.add_deps)
      ndeps = Q.add_deps(jid, depends)
    end
    if delay > 0 and ndeps == 0 and not (depends and #depends > 0) then
      rcall('ZADD', Q.kq(nextq, 'scheduled'), now + delay, jid)
      Q.lower_due(nextq, now + delay)
      result = 'scheduled'
    elseif ndeps > 0 then
      rcall('ZADD', Q.kq(nextq, 'depends'), now, jid)
      if delay > 0 then table.insert(fields, 'scheduled'); table.insert(fields, now + delay) end
      result = 'depends'
    else
      rcall('ZADD', Q.kq(nextq, 'work'), Q.score(tonumber(h.priority) or 0, now), jid)
      Q.wake(nextq)
      result = 'waiting'
    end
    table.insert(fields, 'state'); table.insert(fields, result)
    if token then table.insert(fields, 'done'); table.insert(fields, token .. ' ' .. result) end
    rcall('HSET', key, unpack(fields))
    if h.held and h.held ~= '' then Q.need('throttle'); Q.release(jid, h.held, now) end
    Q.slot_freed(queue)
    return result
  end
end
