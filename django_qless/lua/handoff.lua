-- handoff.lua: hand a ready job straight to an idle worker (extension).
--
--@ needs samples pop
--
-- A worker with nothing to do calls `reserve.wait`: it reserves as `reserve` does and, when
-- nothing is ready, registers as idle on those queues until now + ttl. When jobs then become
-- ready in one of them (any call that wakes the queue: put, release, retry, promotion,
-- unpause...), the engine pops one for the longest-waiting idle worker that still listens on
-- ql:hand:<worker> (PUBSUB NUMSUB) and publishes the job there, the same JSON object as in a
-- reserve reply: the job starts without a reserve round trip. A queue whose new work all
-- went to idle workers gets no ql:wake:<queue> message. Stock qless clients never register,
-- so nothing changes for them. A handed job is popped like any other: if its worker dies, the
-- supervisor releases it, or its lease expires. A registered worker that holds a job (it took
-- one by another call since it registered) is not idle: its registration is dropped instead.
--
-- Commands (after `now`):
--   reserve.wait   worker ttl count queue...   -> JSON {"jobs": [...], "wake": w} (as reserve)
--                  (in worker.lua; ttl: seconds the idle registration lasts, 0 < ttl <= 3600)
--
-- Keys:
--   ql:idle:<queue>    zset  worker -> registration expiry (ZADD, ZRANGEBYSCORE, ZREM,
--                            ZREMRANGEBYSCORE)
--   ql:idle            hash  worker -> the queues it registered on, space-separated
--   ql:config          hash  (HSET of #idle-ttl, the longest ttl registered)
--   channels: ql:hand:<worker> (PUBSUB NUMSUB, PUBLISH), ql:wake:<queue>

Q.mod.handoff = function()
  local rcall = Q.rcall

  -- Forget `worker`'s idle registration on every queue it named.
  function Q.idle_forget(worker)
    local queues = rcall('HGET', K.idle, worker)
    if not queues then return end
    for queue in queues:gmatch('%S+') do rcall('ZREM', KP .. 'idle:' .. queue, worker) end
    rcall('HDEL', K.idle, worker)
  end

  -- Register `worker` as idle on `queues` until now + ttl (dropping lapsed registrations).
  function Q.idle_register(now, worker, ttl, queues)
    -- '#idle-ttl' in ql:config: the longest ttl registered in this keyspace (only grows), so a
    -- pop knows without a lookup when no registration can outlast the lock it takes.
    local top = Q.tonum(Q.cfgraw('#idle-ttl'))
    if not top or ttl > top then
      rcall('HSET', K.config, '#idle-ttl', ttl)
      ctx.cfgv['#idle-ttl'] = nil
    end
    Q.idle_forget(worker)
    local none = K.noidle  -- (Q.flush_wake's queues known to have no idle worker)
    for _, queue in ipairs(queues) do
      if none and none[queue] then none[queue] = nil end
      local key = KP .. 'idle:' .. queue
      rcall('ZREMRANGEBYSCORE', key, '-inf', '(' .. now)
      rcall('ZADD', key, now + ttl, worker)
    end
    rcall('HSET', K.idle, worker, table.concat(queues, ' '))
  end

  -- Pop one job of `queue` for each listening worker of `idle` (oldest registration first)
  -- and publish it on its ql:hand channel; stop when the queue yields nothing (paused,
  -- throttled, at its concurrency limit): those workers stay registered for later.
  function Q.hand_off(now, queue, idle)
    for _, worker in ipairs(idle) do
      if tonumber(rcall('PUBSUB', K.numsub, KP .. 'hand:' .. worker)[2]) == 0
          or rcall('ZCARD', Q.kwjobs(worker)) > 0 then
        -- Gone or stopped waiting; or busy: it took a job by another call since it
        -- registered, and a job handed now would wait behind that one (its lease running).
        Q.idle_forget(worker)
      else
        Q.pop_config({ queue })
        ctx.worker_seen = nil -- this worker's ql:workers entry is its own
        local out = {}
        if Q.pop_queue(now, queue, worker, 1, true, out) == 0 then return end
        Q.idle_forget(worker)
        rcall(K.pub, KP .. 'hand:' .. worker, cjson.encode(out[1]))
      end
    end
  end
end
