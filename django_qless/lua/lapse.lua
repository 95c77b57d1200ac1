-- lapse.lua: jobs whose lock expired (a worker that stopped heartbeating): the courtesy
-- notice, then re-dispatch or failure once retries are spent. Used by pop.lua's pops and
-- reap; a module they load only when a lock is due (Q.need), since under EVALSHA every
-- helper a call can reach is otherwise built again by every call.
--
-- Commands: none.
-- Keys:
--   ql:q:<queue>-locks         zset  (ZRANGEBYSCORE, ZADD, ZREM)
--   ql:j:<jid>                 hash  (HMGET via Q.read_pop, HSET, HDEL; Q.exhausted)
--   ql:j:<jid>-history         list  (RPUSH via Q.history)
--   ql:w:<worker>:jobs         zset  (ZREM)
--   ql:s:stats:<day>:<queue>   hash  (HINCRBY via Q.counter)
--   ql:failures, ql:f:<group>  set, list  (Q.exhausted)
--   channels: ql:log, ql:w:<worker>, ql:stalled, ql:failed

Q.mod.lapse = function()
  local rcall = Q.rcall

  -- Expired locks of a queue: courtesy notice, re-dispatch or failure.
  -- Appends re-dispatched {jid, h} to `selected` and the jids it failed to `dead` (if given).
  function Q.invalidate(now, queue, count, selected, dead)
    local jids = rcall('ZRANGEBYSCORE', Q.kq(queue, 'locks'), '-inf', now, 'LIMIT', 0, count)
    if #jids == 0 then return end
    local grace = Q.cfgnum('grace-period', 10)
    for _, jid in ipairs(jids) do
      local h = Q.read_pop(jid)
      if not h then
        rcall('ZREM', Q.kq(queue, 'locks'), jid)
      else
        local owner = h.worker or ''
        if owner ~= '' then rcall('ZREM', Q.kwjobs(owner), jid) end
        local courtesy = h.grace ~= '1' or grace <= 0
        h.tracked = h.tracked == '1'
        if courtesy then
          if h.tracked then Q.publish(K.stalled, jid) end
          Q.history(jid, now, 'timed-out', nil, h.history)
          h.history, h.visit = nil, nil  -- (both now in the list)
          rcall('HSET', Q.kjob(jid), 'grace', 1)
          Q.lock_lost(jid, owner)
          rcall('ZADD', Q.kq(queue, 'locks'), Q.lease_end(now, grace), jid)
          Q.counter(queue, now, 'retries', 1)
        end
        if not courtesy or grace <= 0 then
          local remaining = (tonumber(h.remaining) or tonumber(h.retries) or 0) - 1
          rcall('HDEL', Q.kjob(jid), 'grace')
          h.grace = nil
          h.remaining = remaining
          if remaining >= 0 then
            table.insert(selected, { jid, h })
          else
            rcall('ZREM', Q.kq(queue, 'locks'), jid)
            local group = 'failed-retries-' .. queue
            local message = 'Job exhausted retries in queue "' .. queue .. '"'
            local fields = { 'remaining', remaining }
            if h.held then table.insert(fields, 'held'); table.insert(fields, '') end
            Q.exhausted(jid, queue, now, group, message, '', fields, h.history)
            if h.tracked then Q.publish(K.failed, jid) end
            Q.publish(K.log, Q.ev_failed(jid, owner, group, message))
            if h.held and h.held ~= '' then Q.need('throttle'); Q.release(jid, h.held, now) end
            if dead then table.insert(dead, jid) end
          end
        end
      end
    end
  end
end
