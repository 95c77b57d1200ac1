-- throttle.lua: acquiring and releasing throttles, used by pop and the job paths (the
-- throttle commands are in throttle_cmds.lua).
--
-- Commands: none (helpers only).
-- Keys:
--   ql:th:<tid>              hash  {id, maximum}
--   ql:th:<tid>-locks        zset  jids holding the throttle -> time acquired
--   ql:th:<tid>-pending      zset  jids waiting for it -> time pended
--   ql:q:<queue>-throttled   zset  throttled jids of a queue -> time throttled
--   ql:q:<queue>-work        zset  (released jobs go back here)
--   ql:config                hash  hidden field #throttle:<queue> (HMGET)
--   ql:j:<jid>               hash  fields throttles, held, state, queue, priority

Q.mod.throttle = function()
  local th_rcall = Q.rcall


  function Q.kth(tid) return KP .. 'th:' .. tid end

  -- The throttle ids that apply to a job popped from `queue`: its own list plus the queue
  -- throttle when one is configured (checked once per call per queue).
  function Q.job_tids(queue, throttles_text)
    ctx.qth = ctx.qth or {}
    local has = ctx.qth[queue]
    if has == nil then
      has = Q.cfgraw(Q.mfield('throttle', queue)) == '1'
      ctx.qth[queue] = has
    end
    local list = Q.list(throttles_text)
    if has then
      local out = { 'ql:q:' .. queue }
      for _, t in ipairs(list) do
        if t ~= out[1] then table.insert(out, t) end
      end
      return out
    end
    return list
  end

  local function maximum(tid)
    return tonumber(th_rcall('HGET', Q.kth(tid), 'maximum')) or 0
  end

  -- Try to take every throttle in `tids`; returns nil on success, else the first full tid.
  function Q.acquire(jid, tids, now)
    for _, tid in ipairs(tids) do
      local max = maximum(tid)
      if max > 0 then
        local key = Q.kth(tid) .. '-locks'
        if th_rcall('ZSCORE', key, jid) == false and th_rcall('ZCARD', key) >= max then
          return tid
        end
      end
    end
    for _, tid in ipairs(tids) do th_rcall('ZADD', Q.kth(tid) .. '-locks', now, jid) end
    return nil
  end

  -- Move a job that could not get `tid` into its queue's throttled set.
  function Q.throttle_job(jid, queue, tid, now)
    th_rcall('ZADD', Q.kq(queue, 'throttled'), now, jid)
    th_rcall('ZADD', Q.kth(tid) .. '-pending', now, jid)
    th_rcall('HSET', Q.kjob(jid), 'state', 'throttled')
  end

  -- Let up to (maximum - held) pending jobs of a throttle (10 if unlimited) back into work.
  local function admit(tid, now)  -- also Q.admit, for the commands
    local pkey = Q.kth(tid) .. '-pending'
    local max = maximum(tid)
    local room = 10
    if max > 0 then room = max - th_rcall('ZCARD', Q.kth(tid) .. '-locks') end
    if room <= 0 then return end
    local jids = th_rcall('ZRANGE', pkey, 0, room - 1)
    if #jids == 0 then return end
    Q.chunked('ZREM', pkey, jids)
    for _, jid in ipairs(jids) do
      local h = Q.read(jid, { 'state', 'queue', 'priority' })
      if h and h.state == 'throttled' and h.queue and h.queue ~= '' then
        th_rcall('ZREM', Q.kq(h.queue, 'throttled'), jid)
        th_rcall('ZADD', Q.kq(h.queue, 'work'), Q.score(tonumber(h.priority) or 0, now), jid)
        th_rcall('HSET', Q.kjob(jid), 'state', 'waiting')
        Q.wake(h.queue)
      end
    end
  end

  Q.admit = admit

  -- Release the throttles a job holds (the JSON list in its `held` field).
  function Q.release(jid, held_text, now)
    if not held_text or held_text == '' then return end
    for _, tid in ipairs(Q.list(held_text)) do
      th_rcall('ZREM', Q.kth(tid) .. '-locks', jid)
      admit(tid, now)
    end
  end

  -- Drop a throttled job from every pending set it may sit in.
  function Q.unpend(jid, queue, throttles_text)
    for _, tid in ipairs(Q.job_tids(queue, throttles_text)) do
      th_rcall('ZREM', Q.kth(tid) .. '-pending', jid)
    end
    th_rcall('ZREM', Q.kq(queue, 'throttled'), jid)
  end
end
