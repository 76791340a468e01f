"""What training engines do at run time that both the memory plan and the speed model depend on:
DeepSpeed ZeRO-3's parameter coordinator (:mod:`.zero3`) -- which parameters it holds gathered
(memory) and how many it all-gathers a step (speed)."""
